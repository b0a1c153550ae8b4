//! The store's writes through the AWS SDK's client (`DYNAMODB_CLIENT=sdk`, or a client a caller
//! builds): the same requests as the direct client's, and its errors as the store's.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{ReturnValue, ReturnValuesOnConditionCheckFailure};

use super::direct::{Write, Written};
use crate::StoreError;

/// One conditional write through the SDK's client.
pub(super) async fn sdk_write(client: &Client, write: Write<'_>) -> Result<Written, StoreError> {
    let names = Some(
        write
            .names
            .iter()
            .map(|(placeholder, name)| ((*placeholder).to_owned(), (*name).to_owned()))
            .collect(),
    );
    let values = Some(
        write
            .values
            .iter()
            .map(|(placeholder, value)| ((*placeholder).to_owned(), value.to_attribute()))
            .collect(),
    );
    let on_failure = write
        .old_on_failure
        .then_some(ReturnValuesOnConditionCheckFailure::AllOld);
    let on_success = write.old_on_success.then_some(ReturnValue::AllOld);
    match write.update {
        Some(update) => {
            let result = client
                .update_item()
                .table_name(write.table)
                .set_key(Some(write.key.to_item()))
                .update_expression(update)
                .condition_expression(write.condition)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .set_return_values(on_success)
                .set_return_values_on_condition_check_failure(on_failure)
                .send()
                .await;
            match result {
                Ok(output) => Ok(Written::Applied(output.attributes)),
                Err(SdkError::ServiceError(e))
                    if e.err().is_conditional_check_failed_exception() =>
                {
                    let UpdateItemError::ConditionalCheckFailedException(failed) = e.into_err()
                    else {
                        unreachable!("checked just above")
                    };
                    Ok(Written::Refused(failed.item))
                }
                Err(e) => Err(unavailable(e)),
            }
        }
        None => {
            let result = client
                .delete_item()
                .table_name(write.table)
                .set_key(Some(write.key.to_item()))
                .condition_expression(write.condition)
                .set_expression_attribute_names(names)
                .set_expression_attribute_values(values)
                .set_return_values(on_success)
                .set_return_values_on_condition_check_failure(on_failure)
                .send()
                .await;
            match result {
                Ok(output) => Ok(Written::Applied(output.attributes)),
                Err(SdkError::ServiceError(e))
                    if e.err().is_conditional_check_failed_exception() =>
                {
                    let DeleteItemError::ConditionalCheckFailedException(failed) = e.into_err()
                    else {
                        unreachable!("checked just above")
                    };
                    Ok(Written::Refused(failed.item))
                }
                Err(e) => Err(unavailable(e)),
            }
        }
    }
}

pub(super) fn unavailable<E, R>(error: SdkError<E, R>) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    StoreError::Unavailable(Box::new(error))
}
